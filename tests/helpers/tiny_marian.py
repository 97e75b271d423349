"""A tiny randomly initialised MarianMT model and its tokenizer, saved in a folder as the
hub's Helsinki-NLP models are: what the docs' recipes and the tests load in place of a
pretrained model, with nothing downloaded."""

import json
from pathlib import Path

#: German sources and English references: the tokenizer's training text, and the
#: sentences a recipe fine-tunes on.
SOURCES = ("Das Haus ist klein.", "Der Hund schläft im Garten.", "Ich trinke gern Kaffee.",
           "Wir fahren morgen nach Berlin.")
REFERENCES = ("The house is small.", "The dog is sleeping in the garden.",
              "I like drinking coffee.", "We are driving to Berlin tomorrow.")
SPECIALS = ("</s>", "<unk>", "<pad>")         # Marian's ids 0, 1, 2


def tiny_marian(folder, seed: int = 0, **sizes) -> Path:
    """Save a random MarianMTModel (``sizes`` override the tiny dimensions) and a
    MarianTokenizer whose SentencePiece models are trained on :data:`SOURCES` and
    :data:`REFERENCES`, in ``folder``; returns it."""
    import sentencepiece
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / "text.txt"
    text.write_text("\n".join(SOURCES + REFERENCES) + "\n")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(folder / "spm"), vocab_size=50, model_type="unigram",
        character_coverage=1.0, unk_id=1, bos_id=-1, eos_id=0, pad_id=2, minloglevel=2)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    vocab.update({token: i for i, token in enumerate(SPECIALS)})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes((folder / "spm.model").read_bytes())
    tokenizer = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"),
                                str(folder / "vocab.json"), eos_token="</s>", unk_token="<unk>",
                                pad_token="<pad>")
    dims = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                max_position_embeddings=64, **sizes)
    config = MarianConfig(vocab_size=len(vocab), pad_token_id=2, eos_token_id=0,
                          decoder_start_token_id=2, forced_eos_token_id=0, **dims)
    torch.manual_seed(seed)
    MarianMTModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for scratch in ("text.txt", "spm.model", "spm.vocab"):
        (folder / scratch).unlink()
    return folder
