"""The ONNX frontend (no torch needed): reading model files (:mod:`.read`), ONNX shape inference plus
narrowpipe's own folding of shape subgraphs so symbolic dims survive legacy exports (:mod:`.shapes`,
:mod:`.fold`), and one table mapping every standard and contrib op type to canonical ops
(:mod:`.table`). :mod:`.frontend` is the entry point; submodules load on first use."""
