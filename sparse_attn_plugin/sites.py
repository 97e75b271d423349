"""The attention sites of an encoder-decoder, as named on the command line
(``--encoder-self-attn-fn``, ...), in the order tables and records list them."""

SITES = ("encoder_self", "decoder_self", "decoder_cross")
