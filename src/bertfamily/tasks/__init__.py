"""Task data and metrics: table/CoNLL/SQuAD readers (`data`, `qa`), encoded rows and their
evaluation (`encode`), classification/NER/QA/regression metrics (`metrics`)."""
