//! Filesystem operations of envd as shell commands and their parsed answers.
