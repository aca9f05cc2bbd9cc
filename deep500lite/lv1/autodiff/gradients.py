"""Every gradient rule of the autodiff, assembled: the table the training graph reads.

:mod:`.rules` holds the table, its decorator and the rules of the basic operators; the families
(:mod:`.rules_nn`, :mod:`.rules_index`, :mod:`.rules_math`, :mod:`.rules_recurrent`) import it and
add theirs. Importing this module imports every family, so :data:`RULES` is complete; the families
never import each other's assembler, so the modules form no import circle.
"""

from deep500lite.lv1.autodiff import rules_index, rules_math, rules_nn, rules_recurrent
from deep500lite.lv1.autodiff.rules import (NOT_DIFFERENTIABLE, RULES, custom_rule, differentiable_operators,
                                            operators_without_gradient)

__all__ = ["RULES", "NOT_DIFFERENTIABLE", "custom_rule", "differentiable_operators", "operators_without_gradient",
           "FAMILIES"]

#: The rule modules whose rules are in :data:`RULES`.
FAMILIES = (rules_nn, rules_index, rules_math, rules_recurrent)
