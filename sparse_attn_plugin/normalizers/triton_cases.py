"""The row cases of the Triton kernels, shared by their launcher (:mod:`.fused_triton`)
and the kernels themselves (:mod:`.triton_kernels`), which imports Triton and is loaded
only on first use: general alpha, sparsemax (``r = 1``), 1.5-entmax (``r = 2``), and
(backward only) softmax's gradient, for top-k."""

GENERAL, SPARSEMAX, ENTMAX15, SOFTMAX = 0, 1, 2, 3
