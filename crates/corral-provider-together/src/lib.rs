//! Together Sandbox adapter (in progress).
