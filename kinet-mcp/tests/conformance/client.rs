//! The client side: what the suite runs as `--command`.

use std::process::ExitCode;

pub(crate) fn main() -> ExitCode {
    ExitCode::FAILURE
}
