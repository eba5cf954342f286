"""Data: corpora for pretraining (`corpora`), table/CoNLL/plain-text readers (`tables`), SQuAD
reading and QA windows (`squad`), TinyBERT data augmentation (`augment`), batch sources and
length-sorted inference batches (`batching`), and task data encoded into rows (`task_data`)."""
