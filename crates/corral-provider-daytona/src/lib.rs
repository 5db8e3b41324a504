//! Daytona adapter (in progress).
