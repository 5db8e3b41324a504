//! The `local` provider's sandbox init as a program of its own: run by the provider, never
//! by hand (see `corral_provider_local::init_main`).

fn main() {
    corral_provider_local::init_main()
}
