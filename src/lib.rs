//! kinet
