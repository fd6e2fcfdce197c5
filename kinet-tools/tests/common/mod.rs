//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

/// Whether git is installed; says so loudly when not.
pub fn have_git() -> bool {
    let found = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        kinet_core::testing::skipped("git is not installed (.ci/test installs it)");
    }
    found
}
