//! Every rdmacm-utils program of the list (and perftest -R, qperf
//! -cm1) between two hosts: two network namespaces joined by a veth pair,
//! each program's server in one and its client in the other, through the
//! drop-in libraries: real RoCEv2 on a link, the CM's MADs to QP1 included.
//! The roles alternate between the namespaces from program to program, so
//! each namespace serves and connects. One pair of namespaces, the programs
//! at once on addresses of their own, small counts (rping and ucmatose:
//! programs.rs). Root only; skips otherwise.

mod common;
mod hosts;

#[test]
fn every_program_between_two_network_namespaces() {
    if let Some(h) = hosts::Hosts::new("svc", None) {
        hosts::every_program(&h, false);
    }
}
