"""Fine-tuning: task data, QA windows, metrics, and the finetune/predict drivers."""
