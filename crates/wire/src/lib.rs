//! RoCEv2 wire format (being built).
#![forbid(unsafe_code)]
