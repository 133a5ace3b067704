"""The PyTorch side of `bench/gpu.py --backend jax`: the same training measurement with
`torch.nn.Transformer`, the peer a user would pick instead of opennmt-lite.

    python bench/gpu_torch.py --preset TransformerBase --dtype bfloat16 [--no-compile] ...

The same model shape as the preset (pre-norm layers, sinusoidal positions, embeddings scaled by
sqrt(d), a biased output layer), the same batches (seeded random ids, every sentence `--length`
tokens: no padding, hence no masks beyond the decoder's causal one), the same loss (cross-entropy
with label smoothing 0.1, summed and divided by the target tokens), the same optimizer (Adam,
betas 0.9 / 0.998, epsilon 1e-7, the Noam schedule), one update per batch. bfloat16: autocast
over float32 weights (Keras' mixed_bfloat16); float32: TF32 products, JAX's default on a GPU.
`torch.compile` compiles the model unless --no-compile. Prints one JSON line (gpu_jax.py's
`train_worker` result keys). Imports nothing of opennmt-lite beyond the preset's shape.
"""

import math
import sys
import time

import gpu_jax


def sinusoids(length, depth):
    import torch

    # OpenNMT-tf's SinusoidalPositionEncoder: the sines in the first half, cosines in the second.
    half = depth // 2
    scales = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    angles = torch.arange(length, dtype=torch.float32)[:, None] * scales[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


def make_model(shape, vocabulary_size, length):
    import torch
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            d = shape["num_units"]
            self.scale = math.sqrt(d)
            self.source_embedding = nn.Embedding(vocabulary_size, d)
            self.target_embedding = nn.Embedding(vocabulary_size, d)
            self.transformer = nn.Transformer(
                d, shape["num_heads"], shape["num_layers"], shape["num_layers"],
                shape["ffn_inner_dim"], dropout=0.1, batch_first=True, norm_first=True)
            self.output_layer = nn.Linear(d, vocabulary_size)
            self.register_buffer("positions", sinusoids(length, d))
            self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(length))

        def forward(self, source_ids, target_ids_in):
            time_s, time_t = source_ids.shape[1], target_ids_in.shape[1]
            source = self.source_embedding(source_ids) * self.scale + self.positions[:time_s]
            target = self.target_embedding(target_ids_in) * self.scale + self.positions[:time_t]
            outputs = self.transformer(source, target, tgt_mask=self.causal[:time_t, :time_t],
                                       tgt_is_causal=True)
            return self.output_layer(outputs)

    return Seq2Seq()


def main(argv=None):
    args = gpu_jax.parse(argv)
    import numpy as np
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(1234)
    shape = gpu_jax._model_shape(args.preset)
    model = make_model(shape, args.vocabulary_size, args.length).to(device)
    d, warmup_steps = shape["num_units"], 8000
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.998), eps=1e-7)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 2.0 * d**-0.5 * min((step + 1) ** -0.5,
                                                    (step + 1) * warmup_steps**-1.5))
    forward = model if args.no_compile else torch.compile(model)
    rng = np.random.default_rng(0)
    batch = gpu_jax.sentences_per_batch(args.batch_tokens, args.length)
    batches = []
    for _ in range(4):
        values = gpu_jax.random_batch(rng, batch, args.length, args.vocabulary_size)
        batches.append({k: torch.from_numpy(v.astype(np.int64)).to(device)
                        for k, v in values.items()})
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    def update(values):
        with autocast:
            logits = forward(values["source_ids"], values["target_ids_in"])
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), values["target_ids_out"].reshape(-1),
            label_smoothing=0.1, reduction="sum")
        normalized = loss / values["target_length"].sum()
        optimizer.zero_grad(set_to_none=True)
        normalized.backward()
        optimizer.step()
        schedule.step()
        return normalized.detach()

    model.train()
    losses = [float(update(batches[index % 4])) for index in range(args.warmup)]
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    loss = None
    for index in range(args.steps):
        loss = update(batches[index % 4])
    losses.append(float(loss))  # (waits for the last update)
    seconds = time.perf_counter() - started
    tokens = 2 * batch * args.length * args.steps
    print(gpu_jax.json.dumps(dict(
        tokens_per_sec=tokens / seconds, steps_per_sec=args.steps / seconds,
        batch_sentences=batch, first_loss=losses[0], last_loss=losses[-1],
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
        compiled=not args.no_compile, torch=torch.__version__)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
