// The migrations are embedded at compile time (`sqlx::migrate!`); a new or
// changed migration file must rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
