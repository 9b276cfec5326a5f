//! The programs of netns_programs.rs between the same kind of two hosts with
//! 5 % loss, 5 % duplication and 5 % reordering on every datagram both
//! devices send (SOFTVERBS_FAULTS, a fixed seed; CM MADs and SIDR included):
//! connections still form (the CM resends unanswered REQ/REP/DREQ and
//! SIDR_REQ, and answers duplicates as the standard says), the data arrives
//! (RC retransmission) and the programs end as on a clean link. UD data is
//! not resent by anyone: see hosts::udaddy and hosts::mckey for what is
//! checked of them. qperf runs here only with SOFTVERBS_TEST_LOSSY_QPERF set
//! (hosts::LOSSY_QPERF says why); it runs by default in netns_programs.rs.

mod common;
mod hosts;

#[test]
fn every_program_between_two_network_namespaces_with_faults() {
    let faults = "loss=0.05,dup=0.05,reorder=0.05,seed=3";
    if let Some(h) = hosts::Hosts::new("svl", Some(faults)) {
        hosts::every_program(&h, true);
    }
}
