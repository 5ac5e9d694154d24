"""The torch frontend, the one place in narrowpipe that imports torch (an optional extra):
``torch.export`` programs and fx ``GraphModule``s lowered through one aten table (:mod:`.aten_table`).
:mod:`.frontend` is the entry point; nothing here imports torch until it is used."""
