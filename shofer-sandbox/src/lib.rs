//! shofer-sandbox (in progress).
