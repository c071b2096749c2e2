"""The transformers models that dpscale's gpt2 and bert-large files stand for,
as torch_reference.py --module takes them (dpstools.real_modules:FUNCTION).

GPT2LMHeadModel and BertForMaskedLM from Hugging Face's transformers,
built from their configurations (no download: the weights are their own
initialisation) at the shapes of bench/models/gpt2.model (1024 tokens,
12 layers of 768) and bert-large.model (512 tokens, 24 layers of 1024,
16 heads, 4096 wide), dropout 0 as dpscale's files have none, and the
library's own attention. Each is the model class itself, its forward
taking token ids and returning its logits [samples, tokens, vocab] (the
output object's .logits, with no cache), which torch_reference.py reads
as rows of classes. The tiny_ functions are the same classes at the
shapes of tests/fixtures/models/tiny-gpt.model (and reference_models'
tiny_bert), for the device check's rehearsal on the CPU.
"""

NO_DROPOUT = {"gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
              "bert": ("hidden_dropout_prob", "attention_probs_dropout_prob")}


def logits_class(base, **fixed):
    """BASE (a transformers model class) whose forward(ids) returns the logits
    alone; FIXED: the keyword arguments every forward takes."""

    class LogitsOnly(base):
        def forward(self, ids):
            return super().forward(input_ids=ids, return_dict=True, **fixed).logits

    LogitsOnly.__name__ = LogitsOnly.__qualname__ = base.__name__
    return LogitsOnly


def gpt2_lm(vocab=50257, tokens=1024, d=768, layers=12, heads=12):
    """transformers' GPT2LMHeadModel at GPT-2 small's shapes (its head tied to wte)."""
    import transformers
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=tokens, n_embd=d, n_layer=layers,
                                  n_head=heads, **dict.fromkeys(NO_DROPOUT["gpt2"], 0.0))
    return logits_class(transformers.GPT2LMHeadModel, use_cache=False)(cfg)


def bert_mlm(vocab=30522, tokens=512, d=1024, layers=24, heads=16, ff=4096):
    """transformers' BertForMaskedLM at BERT-large's shapes (its decoder tied to the word table)."""
    import transformers
    cfg = transformers.BertConfig(vocab_size=vocab, max_position_embeddings=tokens, hidden_size=d,
                                  num_hidden_layers=layers, num_attention_heads=heads,
                                  intermediate_size=ff, hidden_act="gelu",
                                  **dict.fromkeys(NO_DROPOUT["bert"], 0.0))
    return logits_class(transformers.BertForMaskedLM)(cfg)


def tiny_gpt2_lm():
    """GPT2LMHeadModel at tiny-gpt.model's shapes (512 tokens of vocabulary, 16 a sample)."""
    return gpt2_lm(vocab=512, tokens=16, d=64, layers=2, heads=4)


def tiny_bert_mlm():
    """BertForMaskedLM at reference_models.tiny_bert's shapes."""
    return bert_mlm(vocab=512, tokens=16, d=64, layers=2, heads=4, ff=128)
