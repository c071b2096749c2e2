#!/usr/bin/env python3
"""dpstools.real_modules' builders of transformers' GPT-2 and BERT models.
configs: with a stand-in transformers module that records what it is
given (no PyTorch, no transformers), each builder passes its model's
configuration (GPT-2 small: 50257 tokens of vocabulary, 1024 positions, 12
layers of 768, 12 heads; BERT-large: 30522, 512, 24 layers of 1024, 16
heads, 4096 wide, gelu; the tiny ones 512, 16, 2 layers of 64, 4 heads,
BERT 128 wide), every dropout 0, and returns the library's class under
its own name whose forward(ids) calls the library's with input_ids,
return_dict and (GPT-2 alone) use_cache=False and returns the output's
logits alone; logits_class passes any fixed keyword to every forward.
params: with transformers (skip, 77, without it or PyTorch), the tiny
models' parameter counts, worked out by hand from their layers (the head
tied to the token table: not counted again), which for GPT-2 is also the
sum of tests/fixtures/models/tiny-gpt.model's tensors; no dropout above
0, and logits [2, 16, 512] from 2 samples of 16 token ids.
Usage: test_dpstools_real_modules.py MODELS_FIXTURES CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools real_modules configs", FIXTURES + "/models", "configs", suite=NOSAN,
              timeout=300),
         test("dpstools real_modules params", FIXTURES + "/models", "params", suite="torch",
              timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import sys
import types

from helpers import PYTHON, expect, missing_modules, run_cases

GPT2 = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12}
BERT = {"vocab_size": 30522, "max_position_embeddings": 512, "hidden_size": 1024,
        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "hidden_act": "gelu"}
TINY_GPT2 = {"vocab_size": 512, "n_positions": 16, "n_embd": 64, "n_layer": 2, "n_head": 4}
TINY_BERT = {"vocab_size": 512, "max_position_embeddings": 16, "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
             "hidden_act": "gelu"}
GPT2_NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
BERT_NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def stand_in():
    """A transformers module of configurations that keep their keywords and
    models whose forward returns an output holding what it was called with."""
    mod = types.ModuleType("transformers")

    class Config:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class Model:
        def __init__(self, config):
            self.config = config

        def forward(self, **kwargs):
            return types.SimpleNamespace(logits=("logits of", kwargs))

        def __call__(self, *args):
            return self.forward(*args)

    for name, base in (("GPT2Config", Config), ("BertConfig", Config),
                       ("GPT2LMHeadModel", Model), ("BertForMaskedLM", Model)):
        setattr(mod, name, type(name, (base,), {}))
    return mod


def expect_model(model, cls, config, forward_kwargs, what):
    expect(isinstance(model, cls) and type(model).__name__ == cls.__name__ and
           type(model).__qualname__ == cls.__name__,
           f"{what}: a {type(model).__qualname__} ({type(model).__mro__}), expected a "
           f"{cls.__name__} under that name")
    expect(model.config.kwargs == config, f"{what}: configuration {model.config.kwargs}, "
                                          f"expected {config}")
    ids = object()
    got = model(ids)
    want = ("logits of", {"input_ids": ids, **forward_kwargs})
    expect(got == want, f"{what}: forward(ids) returned {got}, expected the logits of {want[1]}")


def case_configs(_):
    fake = stand_in()
    sys.modules["transformers"] = fake
    from dpstools import real_modules
    gpt2_call, bert_call = {"return_dict": True, "use_cache": False}, {"return_dict": True}
    built = {"gpt2_lm": (real_modules.gpt2_lm(), fake.GPT2LMHeadModel,
                         {**GPT2, **GPT2_NO_DROPOUT}, gpt2_call),
             "bert_mlm": (real_modules.bert_mlm(), fake.BertForMaskedLM,
                          {**BERT, **BERT_NO_DROPOUT}, bert_call),
             "tiny_gpt2_lm": (real_modules.tiny_gpt2_lm(), fake.GPT2LMHeadModel,
                              {**TINY_GPT2, **GPT2_NO_DROPOUT}, gpt2_call),
             "tiny_bert_mlm": (real_modules.tiny_bert_mlm(), fake.BertForMaskedLM,
                               {**TINY_BERT, **BERT_NO_DROPOUT}, bert_call)}
    for name, (model, cls, config, call) in built.items():
        expect_model(model, cls, config, call, name)
    cls = real_modules.logits_class(fake.BertForMaskedLM, output_hidden_states=False, x=1)
    got = cls(fake.BertConfig())(7)
    want = ("logits of", {"input_ids": 7, "return_dict": True, "output_hidden_states": False,
                          "x": 1})
    expect(got == want, f"logits_class with fixed keywords: forward(7) returned {got}, "
                        f"expected {want}")


def gpt2_params(vocab_size, n_positions, n_embd, n_layer, **_):
    """GPT2LMHeadModel's parameters: token and position tables, each block's
    two layer norms, qkv (d x 3d), projection, MLP (d x 4d, 4d x d), each
    with its bias, the final norm; the head is the token table."""
    d = n_embd
    block = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + \
        (4 * d * d + d)
    return vocab_size * d + n_positions * d + n_layer * block + 2 * d


def bert_mlm_params(vocab_size, max_position_embeddings, hidden_size, num_hidden_layers,
                    intermediate_size, **_):
    """BertForMaskedLM's parameters: word, position and 2 token-type tables
    and their norm; each layer's q, k, v and output (d x d and a bias),
    norm, feed-forward (d x ff, ff x d), norm; no pooler; the head's
    transform (d x d, a norm) and its bias over the vocabulary, its
    weights the word table's."""
    d, ff = hidden_size, intermediate_size
    embeddings = (vocab_size + max_position_embeddings + 2) * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d + (d * ff + ff) + (ff * d + d) + 2 * d
    head = (d * d + d) + 2 * d + vocab_size
    return embeddings + num_hidden_layers * layer + head


def model_file_params(path):
    """The sum of a model file's tensors' sizes ("tensor NAME AxB ...")."""
    total = 0
    with open(path) as f:
        for line in f:
            if line.startswith("tensor "):
                n = 1
                for x in line.split()[2].split("x"):
                    n *= int(x)
                total += n
    return total


def case_params(models):
    missing = missing_modules(["torch", "transformers"])
    if missing:
        print(f"skipped: {PYTHON} lacks {', '.join(missing)} (transformers builds the models)")
        return 77
    import torch
    from dpstools import real_modules
    tiny_file = model_file_params(os.path.join(models, "tiny-gpt.model"))
    want = {"tiny_gpt2_lm": gpt2_params(**TINY_GPT2), "tiny_bert_mlm": bert_mlm_params(**TINY_BERT)}
    expect(want["tiny_gpt2_lm"] == tiny_file, f"GPT-2 at tiny-gpt.model's shapes has "
           f"{want['tiny_gpt2_lm']} parameters by hand, the file's tensors {tiny_file}")
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    for name, count in want.items():
        model = getattr(real_modules, name)()
        got = sum(p.numel() for p in model.parameters())
        expect(got == count, f"{name}: {got} parameters, {count} by hand")
        drop = [(n, m.p) for n, m in model.named_modules()
                if isinstance(m, torch.nn.Dropout) and m.p != 0]
        expect(not drop, f"{name}: dropout above 0: {drop}")
        with torch.no_grad():
            logits = model(ids)
        expect(isinstance(logits, torch.Tensor) and tuple(logits.shape) == (2, 16, 512),
               f"{name}: forward gave {type(logits).__name__} "
               f"{tuple(getattr(logits, 'shape', ()))}, expected logits (2, 16, 512)")


if __name__ == "__main__":
    run_cases(globals())
