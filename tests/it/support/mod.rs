//! What the test modules share.

pub mod fakes;
mod world;

pub use world::*;
