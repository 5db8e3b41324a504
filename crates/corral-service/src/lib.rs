//! Corral's use cases, framework-free.
pub mod bridge;
pub mod error;
