"""The one sampling path: encode prompts, generate with the KV cache, n samples per prompt, stop
and pad, decode, score with the task's verifier. RL, evaluation, the warm-up's evaluation, the
safeguards and `catsim llm sample` all draw completions through `sample_groups`.

`generate` draws the completions of a batch of (left-padded) prompts with one of two engines:
"cascade" (the default, `rollout.cascade`): one prefill per distinct prompt, its keys/values
stored once and shared by the prompt's rows, decode in jitted chunks between which finished rows
are dropped; "static" (the reference, `rollout.static`): one prefill over all rows, then a jitted
`lax.while_loop` of single-token decode steps over the whole batch until every sequence has
finished. What they share (each row's key, the sampling step, the decode layout of the weights,
power-of-two sizes) is `rollout.decode`; both decode with the transformer's public blocks.

Modules: `engines` (`generate`, `ENGINES`), `cascade`, `static`, `decode`, `groups`
(`sample_groups`, `Groups`, prompt encoding and padding).

    sampling = SamplingConfig(max_new_tokens=256, temperature=1.0, top_p=1.0, stop_tokens=(eos,))
    out = generate(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key,
                   prompt_ids_B=prompt_ids, sample_ids_B=sample_ids)
    out.tokens_BxN, out.logprobs_BxN, out.mask_BxN

Sampling draws one uniform per row and step and inverts the CDF of the sampling distribution
(far cheaper than V Gumbel variates). Reproducibility: the randomness of sample b at decode step n is
`fold_in(fold_in(fold_in(key, prompt_ids_B[b]), sample_ids_B[b]), n)`, so a completion depends only
on (key, prompt id, sample index, prompt tokens) — not on where the sample sits in the batch, on
the batch size, on the padding width or on the number of devices (up to float rounding of logits).

Log-probabilities: `logprobs_BxN` is log pi_sample(token), the distribution actually sampled from
(temperature, top-k, top-p applied; 0 for greedy decoding); `model_logprobs_BxN` is the model's
plain log-softmax at temperature 1, which is what a trainer compares against.
"""

# The two switches live in their modules (not re-exported here, where a copy could be assigned to
# no effect): `rollout.decode.DECODE_SPLIT_LAYERS` and `rollout.engines.ROLLOUT_ENGINE`.
from catsim.llm.rollout.decode import bucket, decode_params
from catsim.llm.rollout.engines import ENGINES, generate
from catsim.llm.rollout.groups import (
    Groups,
    encode_answer,
    encode_prompt,
    left_pad,
    sample_groups,
    stop_and_pad,
)
from catsim.llm.sampling import Rollout, SamplingConfig, sampling_logits

__all__ = [
    "ENGINES", "Groups", "Rollout", "SamplingConfig", "bucket",
    "decode_params", "encode_answer", "encode_prompt", "generate", "left_pad", "sample_groups",
    "sampling_logits", "stop_and_pad",
]
