"""The numpy array aliases every layer uses for typed columns."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
# Series ids of samples: any integer width (the store keeps 32 bits, the journal's files 64).
SidArray = npt.NDArray[np.signedinteger[Any]]
