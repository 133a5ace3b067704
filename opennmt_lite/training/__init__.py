"""Training: the train step (accumulation), the loop, losses, optimizers, schedules, distribution."""
