"""Checkpoints: Hugging Face state dicts to ours and back (`convert`, per-family key tables in
`keymaps`) and reading and writing model directories (`io`)."""
