"""Looking inside the model: recording intermediate tensors, and showing them."""
