//! A small stack: a quote needs a few kilobytes, and the smaller the
//! instance's memory, the less a fresh instance per call costs.
fn main() {
    println!("cargo:rustc-link-arg=-zstack-size=65536");
}
