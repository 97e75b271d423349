"""The row cases of the Triton kernels, shared by their launcher (:mod:`.fused_triton`)
and the kernels themselves (:mod:`.triton_kernels`), which imports Triton and is loaded
only on first use: general alpha, sparsemax (``r = 1``), 1.5-entmax (``r = 2``),
softmax (in the row kernels, backward only: top-k's gradient) and top-k (the fused
attention kernels of :mod:`.attention_kernels`)."""

GENERAL, SPARSEMAX, ENTMAX15, SOFTMAX, TOPK = 0, 1, 2, 3, 4
