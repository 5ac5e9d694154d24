"""How a program runs on a machine. Importing the package registers its passes and analyses
(``bind-dims``, ``precision``, ``fuse``, ``kernels``, ``cost-table``) with the IR's pass manager."""

from . import bind_dims, fusion, precision  # noqa: F401  (registration)
