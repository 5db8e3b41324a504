//! Build provenance for `/healthz`: the git commit and the build time, unless the environment
//! already sets `CORRAL_GIT_COMMIT` / `CORRAL_BUILD_TIME` (e.g. a release pipeline).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CORRAL_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=CORRAL_BUILD_TIME");
    // Re-run when HEAD moves (a new commit or checkout), not on every build.
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
    if std::env::var_os("CORRAL_GIT_COMMIT").is_none()
        && let Ok(out) = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
        && out.status.success()
    {
        let commit = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !commit.is_empty() {
            println!("cargo:rustc-env=CORRAL_GIT_COMMIT={commit}");
        }
    }
    if std::env::var_os("CORRAL_BUILD_TIME").is_none()
        && let Ok(out) = Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
        && out.status.success()
    {
        let when = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        println!("cargo:rustc-env=CORRAL_BUILD_TIME={when}");
    }
}
