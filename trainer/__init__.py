"""CIFAR-10 training with PyTorch DDP: one clear path from data to metrics (`python -m trainer`)."""
