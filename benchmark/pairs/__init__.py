"""A generated target and EAGLE-3 draft of chosen accept length, and FlashInfer kernels for its shapes."""
