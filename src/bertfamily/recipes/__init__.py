"""Recipes: pretrain (`pretrain`), distil (`distill`), fine-tune (`finetune`) and tokenizer
training (`tokenizer`), over the shared pieces in `common`."""
