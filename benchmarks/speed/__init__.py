"""Speed and memory: throughput of embedding, attention, fine-tuning and training; out-of-core RSS; atlas scale."""
