"""Training objectives: pretraining instances, masking and losses (`instances`, `masking`,
`pretraining`), task losses (`tasks`) and knowledge distillation (`distillation`)."""
