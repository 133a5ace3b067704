"""Adam, its update in TensorFlow's fused kernel.

Keras 3's Adam writes its update as separate element-wise ops per variable (m, v, the step:
about ten passes over each variable); TensorFlow's `ResourceApplyAdam` kernel does the same
arithmetic in one pass, as OpenNMT-tf's Keras 2 optimizers did (measured in issue 19's
profiles on an AVX2 CPU: 0.26 s of op time per step for Keras' ops, 0.04 s for the fused op).
The formula is Keras' (and the kernel's):

    alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
    m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
    variable -= alpha * m / (sqrt(v) + epsilon)

with t the step (iterations + 1). The slots are Keras' own (`_momentums`, `_velocities`), so
checkpoints, the optimizer-state names and OpenNMT-tf's Adam slots are unchanged. The fused
kernel is a TensorFlow fast path: taken when the layers' fast paths are on
(`layers/fast_paths.py`), for plain (not distributed) variables and without amsgrad; otherwise
Keras' own update runs.
"""

import keras

from opennmt_lite import PACKAGE
from opennmt_lite.layers import fast_paths

if fast_paths.TENSORFLOW:
    import tensorflow as tf


@keras.saving.register_keras_serializable(package=PACKAGE)
class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam whose update_step runs TensorFlow's fused ResourceApplyAdam."""

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or not fast_paths.enabled():  # (always so on JAX)
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        plain = [_resource_variable(x) for x in (variable, m, v)]
        if any(x is None for x in plain):
            return super().update_step(gradient, variable, learning_rate)
        dtype = plain[0].dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=plain[0].handle, m=plain[1].handle, v=plain[2].handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))


def _resource_variable(variable):
    """The plain tf.Variable behind a Keras or tf variable, or None for a distributed one (or a
    replica's component of one: its handle depends on the replica context, so Keras' update
    handles it)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    if (isinstance(variable, tf.distribute.DistributedValues)
            or getattr(variable, "_distributed_container", None) is not None
            or not isinstance(variable, tf.Variable)):
        return None
    return variable
