"""Evaluation: metrics computed from predictions and gold values (`metrics`: classification,
multi-label, regression, entity-level NER, SQuAD exact match and F1)."""
