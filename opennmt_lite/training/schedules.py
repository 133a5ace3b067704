"""Learning-rate schedules with OpenNMT-tf's step conventions.

Keras optimizers evaluate the schedule at `iterations` *before* the update, so update k (1-based)
uses schedule(k - 1), as OpenNMT-tf's optimizers did.
"""

import keras
from keras import ops

from opennmt_lite import PACKAGE

# The integer dtype of the schedules' step arithmetic: int64 as OpenNMT-tf, int32 on JAX (whose
# default 64-bit types are off; exact for any step below 2**31).
_STEP_INT = "int64" if keras.backend.backend() == "tensorflow" else "int32"


@keras.saving.register_keras_serializable(package=PACKAGE)
class NoamDecay(keras.optimizers.schedules.LearningRateSchedule):
    """scale * model_dim**-0.5 * min(n**-0.5, n * warmup_steps**-1.5), with n = step + 1."""

    def __init__(self, scale, model_dim, warmup_steps):
        self.scale = float(scale)
        self.model_dim = int(model_dim)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        n = ops.cast(step, "float32") + 1.0
        return (
            self.scale
            * self.model_dim**-0.5
            * ops.minimum(ops.rsqrt(n), n * self.warmup_steps**-1.5)
        )

    def get_config(self):
        return {"scale": self.scale, "model_dim": self.model_dim, "warmup_steps": self.warmup_steps}


@keras.saving.register_keras_serializable(package=PACKAGE)
class InvSqrtDecay(keras.optimizers.schedules.LearningRateSchedule):
    """OpenNMT-tf 2.32's InvSqrtDecay (fairseq's inverse_sqrt), with n = step + 1: a linear warmup
    initial_learning_rate + (learning_rate - initial_learning_rate) * n / warmup_steps while
    n <= warmup_steps, then learning_rate * sqrt(warmup_steps / n)."""

    def __init__(self, learning_rate, warmup_steps, initial_learning_rate=0.0):
        self.learning_rate = float(learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.initial_learning_rate = float(initial_learning_rate)

    def __call__(self, step):
        n = ops.cast(step, "float32") + 1.0
        warmup = ops.convert_to_tensor(float(self.warmup_steps), "float32")
        rising = (self.initial_learning_rate
                  + (self.learning_rate - self.initial_learning_rate) * (n / warmup))
        return ops.where(n <= warmup, rising, self.learning_rate * ops.sqrt(warmup / n))

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "initial_learning_rate": self.initial_learning_rate}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ScheduleWrapper(keras.optimizers.schedules.LearningRateSchedule):
    """OpenNMT-tf's wrapper: delays the schedule, stretches its steps, and bounds it below.

    lr(step) = max(schedule(max(step - start_decay_steps, 0) // decay_step_duration), minimum)
    """

    def __init__(self, schedule, start_decay_steps=0, decay_step_duration=1, minimum_learning_rate=0.0):
        self.schedule = schedule
        self.start_decay_steps = int(start_decay_steps)
        self.decay_step_duration = int(decay_step_duration)
        self.minimum_learning_rate = float(minimum_learning_rate)

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, _STEP_INT) - self.start_decay_steps, 0)
        step = step // self.decay_step_duration
        return ops.maximum(self.schedule(step), self.minimum_learning_rate)

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "start_decay_steps": self.start_decay_steps,
            "decay_step_duration": self.decay_step_duration,
            "minimum_learning_rate": self.minimum_learning_rate,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)
