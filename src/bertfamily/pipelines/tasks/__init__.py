"""Task pipelines: classification (`classify`), NER (`ner`), extractive QA (`qa`), fill-mask
(`fill_mask`) and early exit (`early_exit`)."""
