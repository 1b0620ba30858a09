"""Where the guard corpus lives: 26 ShapeEnv states captured from real torch 2.13 traces,
one JSON file per case, described by ``data/corpus/SCHEMA.md``."""

import os

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "corpus")
