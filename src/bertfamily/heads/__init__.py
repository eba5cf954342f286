"""Heads on the encoder: pretraining (MLM, NSP/SOP; `pretraining`, `span_boundary`,
`enhanced_mask_decoder`), fine-tuning heads and their losses (`tasks`), and default global
attention for windowed models (`global_attention`)."""
