//! The sans-IO softverbs engine.
//!
//! `proto` owns every rule of the verbs object model and decides everything as a
//! pure function of its inputs: it holds no sockets, threads or clocks and contains
//! no `unsafe`. It holds the device model ([`device`]), the object tables
//! ([`table`], named by typed [`handle`]s), protection domains, memory regions,
//! completion queues, shared receive queues, address handles and queue pairs
//! ([`qp`]) with the exact modify-QP state machine of the Linux kernel
//! (`shared/spec/qp-state-machine.md`) and query semantics
//! (`shared/spec/qp-query.md`), and the data path: each QP is one actor
//! ([`qp::actor::Qp`]) that the [`Engine`] drives.
//!
//! Every refusal is an [`Error`] that names what was wrong and maps to the errno
//! Linux returns in the same case ([`Error::errno`]).
//!
//! # Layers
//!
//! A file imports only what sits below it, as drawn here, top floor first
//! (no circle of imports; a module's `mod.rs` never reaches into its own
//! children; `tests/layering.rs` checks the drawing against the imports):
//!
//! ```text
//! datapath  datapath::gsi  datapath::mcast  datapath::post  datapath::raw  datapath::rx  datapath::tx  engine::memory  engine::queues  engine::sink  engine::turn  engine::xrc  testing
//!                             impl Engine: posts, demultiplexing, transmit, timers, QP1, drive + sync; the test harness
//! engine  qp::actor::local  qp::actor::raw  qp::actor::rx  qp::actor::state  qp::actor::tx
//!                             object tables, use counts; one QP's turns
//! qp::actor                   one QP: on_packet, on_timeout, on_modify, post_*, next_packet
//! output                      events, transmit descriptors, device counters, PostOutcome
//! qp::completer  qp::data  qp::responder::remote
//! qp::requester  qp::responder
//! qp::wqe  sq::slot           WQEs and the queues that recycle them; a send ring slot's words
//! cq  sq                      completion queues; the send ring
//! cqe  mr::view  timers       CQE slots; the MRs as posts see them; ACK/RNR timers
//! qp::modify  qp::sgl  rq  wc the modify table; gather/scatter; the receive ring; completions
//! ah  cm::qp_attr  gsi  qp::create  srq  wr
//!                             AHs; the CM's QP attributes; QP1; create checks; SRQs; the WR facade
//! cm  device  wr::check       the CM; the device model; the posting rules
//! cm::sidr  error  wr::types  SIDR; the error enum (takes the leaf errors below); the WR types
//! cm::conn  mr::mw            CM connections; memory windows
//! cm::outbox  mr  xrcd        the CM's outbox; MRs and keys; XRC domains
//! cm::held  cm::types  dm  intact  mcast  qp  qp::table  refusal  sched  table
//! cm::timing  errno  frame  handle  lock  mask  memory  rss  run  spec_md  tso  types
//!                             ground floor: imports nothing of the crate
//! ```
//!
//! Inside layer 3 the order is wqe, sgl → requester → completer (the
//! requester's other half, which alone sees its fields) → responder → data.
//! The leaf modules never name `Error`: they return their own errors
//! (`mr::check_reg` a [`refusal::Refusal`], `dm` a `DmError`, ...) and the
//! error enum takes them. `tests/layering.rs` checks the sources (a name the
//! crate root re-exports counts as its module): no circle of imports,
//! and nothing below the engine names the engine.
//!
//! # The path of a post (no engine, no engine lock)
//!
//! ```text
//! SendRing::post(wr, inline, xrc_srqn)   (any thread; Engine::post_send calls the same)   sq.rs
//!   per-QP posting lock → check_post_send against the mirror (state, max_rd_atomic,
//!   Q_Key), the fixed capacities, queued (ring + engine queue) and, for UD, the
//!   AhView (read lock; the AH's PD and address vector are copied into the slot)
//!   (an IBV_SEND_INLINE post of the safe API gathers its bytes first through
//!   the device's read-only MrView: SendRing::gather_inline, the engine's check)
//!   ERR/SQE at the check → Flush: Engine::post_send makes the flush completion
//!   → queued += 1 → slot (SGEs, inline bytes copied now) → tail (Release)
//!   → SeqCst fence → mirror again: ERR/SQE/RESET → Settle (Engine::settle_send)
//!   → first post since the engine looked: the QP goes on the device's PostedList
//!     (the posting thread's lane's, crate `lanes`)
//!   → Queued { idle }: idle = nothing else was outstanding (the poster may transmit)
//! Engine::drive / drive_ctl(h), before every call on the QP        engine.rs
//!   Qp::take_posted: tail (Acquire) → each slot → Qp::post_send (recycled WQE, no
//!   allocation in steady state) or, in ERR/SQE, a flush completion (RESET: dropped)
//!   → head (Release); a WQE leaving the send queue → queued −= 1 before its completion
//!   Engine::sync(h): wants_tx → its home lane's ready queue (once; a claimed QP's
//!   stays with its thread, sched::TxClaims); the ring's mirror (a change to
//!   ERR/SQE/RESET: SeqCst fence, then take what the ring holds)
//! Engine::poll_transmit(now, mem, buf)  (or _claimed, with a thread's claims)   datapath/tx.rs
//!   take_posted_in(claims.reach): the QPs listed in the lanes the thread reaches
//!   (only those; each gets its lane as home) → drive_ctl → ready queue
//!   the reached lanes' ready queues, own lane first (claimed) → Qp::next_packet:
//!   response first, else Requester::next_packet
//!   → gather (MR check) → emit headers + ICRC into buf → after_request (ACK timer / UC·UD completion)
//!   (_run: to a peer reached intact, the message's next packets into the same buf, crate::run)
//!   sync(h): deadline → timer heap; release_claims: more to send → back of its ready queue
//! ```
//!
//! Who calls `poll_transmit` after a post is the driver's choice: sv_io's
//! `Driver::posted` lets the posting thread do it when the queue was idle,
//! else the progress thread does.
//!
//! # The path of a receive post (no engine, no engine lock)
//!
//! ```text
//! RecvRing::post(wr)          (any thread; Engine::post_recv calls the same)   rq.rs
//!   per-QP posting lock → check_post_recv against the state mirror, max_recv_sge,
//!   queued (ring + engine queue) → queued += 1 → slot words → tail (Release)
//!   → SeqCst fence → state mirror again: ERR/RESET → Settle (engine flushes/discards)
//!   ERR at the check → Flush: Engine::post_recv makes the flush completion
//! engine: RecvQueue::{pop_front, front, clear} drain the ring first    qp/wqe.rs
//!   (tail Acquire → recycled WQEs → head Release); a WQE leaving → queued −= 1
//!   before its completion is pushed; Engine::sync writes the state mirror
//!   (on a change: SeqCst fence, then settle what the ring holds)
//! ```
//! An SRQ's ring is the same, without state (a full ring falls back to the
//! engine lock).
//!
//! # The path of a poll (no engine, no engine lock)
//!
//! ```text
//! producer (a QP's turn, under the CQ's producer lock): Sink::complete → CqRing::push   cq.rs
//!   head (Acquire) → room? (else overrun for good) → slot words (cqe.rs) → tail (Release)
//!   → SeqCst fence → notify armed? → disarm (CAS), completion event
//! pollers (any thread, any number): SharedCq::poll_with            cq.rs
//!   per-CQ consumer lock → tail (Acquire) → copy slots out → head (Release)
//! SharedCq::req_notify: notify = max(notify, want) → SeqCst fence (no lost event)
//! rare, with &mut Engine (the producer excluded) + the consumer lock: growth
//! of the slot array, purge on RESET; resize only moves the capacity.
//! ```
//!
//! # The path of a received datagram
//!
//! ```text
//! Engine::handle_datagram(now, from, to, bytes, mem)      datapath/rx.rs
//!   TransportRepr::parse → ICRC → accept (QPN, transport, state, peer, P_Key)   drops counted
//!   (DestQP 0xFFFFFF: datapath/mcast.rs, each QP attached to the group `to` names, in turn)
//!   Engine::drive(h) → Qp::on_packet                       qp/actor/rx.rs
//!     request:  Responder::handle (RQ or the SRQ's queue via the sink) → counters,
//!               completions → CQ (overrun → QP to ERR), SRQ limit, fatal → ERR + flush
//!     response: Requester::handle_response (completer) → on_progress (budgets, ACK timer),
//!               RNR wait, completions → CQ, fatal → ERR + flush, SQD drain check
//!   Engine::sync(h): responses/resends queued → ready queue; new deadline → timer heap
//! Engine::handle_timeout(now): timer heap pops the due QPs → Qp::on_timeout → sync
//! ```
//!
//! # Threads
//!
//! The data path above takes `&self`: several threads run it at once, each
//! holding the lock of the QP whose turn it is and, briefly, those of what
//! QPs share (an SRQ's queue, a CQ's producer side, the event queue, the
//! scheduler; [`lock`], spec/concurrency.md §2); control verbs take
//! `&mut self`. A thread that gathers a batch of datagrams keeps the QPs it
//! took them from ([`sched::TxClaims`]) until the batch left.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ah;
pub mod cm;
pub mod cq;
pub mod cqe;
pub mod datapath;
pub mod device;
pub mod dm;
pub mod engine;
pub mod errno;
pub mod error;
pub mod frame;
pub mod gsi;
pub mod handle;
pub mod intact;
pub mod lock;
pub mod mask;
pub mod mcast;
pub mod memory;
pub mod mr;
pub mod output;
pub mod qp;
pub mod refusal;
pub mod rq;
pub mod rss;
pub mod run;
/// The seeded generator (crates/faults): the CM draws its IDs from it.
pub use faults::rng;
pub mod sched;
#[cfg(test)]
mod spec_md;
pub mod sq;
pub mod srq;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timers;
pub mod tso;
pub mod types;
pub mod wc;
pub mod wr;
pub mod xrcd;

pub use engine::Engine;
pub use errno::Errno;
pub use error::Error;
pub use mask::AttrMask;
pub use types::*;
