"""Input pipeline: reading, tokenizing, filtering, batching (see pipeline.py)."""

from opennmt_lite.data.batching import (
    SortedPlanner,
    accum_steps,
    opennmt_shuffle,
    plan_opennmt_batches,
)
from opennmt_lite.data.corpus import (
    DROP_REASONS,
    Controls,
    DatasetStats,
    ParallelCorpus,
    RaggedIds,
    encode_lines,
    filter_mask,
    load_monolingual_corpus,
    load_parallel_corpus,
)
from opennmt_lite.data.pipeline import (
    EvaluationInput,
    InferenceInput,
    TrainingInput,
    batch_signature,
    group_batches,
)
from opennmt_lite.data.text import DataError, read_lines, read_parallel
