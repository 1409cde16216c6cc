//! shofer-exec: the command engine (placeholder).
