// The migrations are embedded at compile time (`sqlx::migrate!`): a new
// migration file must rebuild the crate, which cargo does not know by
// itself.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
