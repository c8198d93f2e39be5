//! The agent library is marked `-z nodelete`: after `clrprof attach` detaches it, the runtime's
//! `dlclose` leaves it mapped, so no runtime thread can run a thread-local destructor or a late
//! `SIGPROF` handler from unmapped code, and the next attach reuses the same image.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
