"""BibTeX entries shared by several `evaluate` metric scripts (their `_CITATION`)."""

HIMO_CLIP = """\
@inproceedings{wu2026himoclip,
  author    = {Wu, Ruijia and Chen, Ping and Shen, Fei and Zhao, Shaoan and Hui, Qiang and Gao, Huanlin and
               Lu, Ting and Liu, Zhaoxiang and Zhao, Fang and Wang, Kai and Lian, Shiguo},
  title     = {HiMo-CLIP: Modeling Semantic Hierarchy and Monotonicity in Vision-Language Alignment},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence},
  year      = {2026},
  eprint    = {2511.06653},
  archivePrefix = {arXiv},
  url       = {https://arxiv.org/abs/2511.06653}
}
"""
