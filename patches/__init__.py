"""Width muP + depth-muP for megatron-core GPTModel (spec: docs/parametrization.md)."""
