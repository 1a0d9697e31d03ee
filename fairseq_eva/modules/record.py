"""What a checkpoint records of its attention: each role's mechanism and every option of it, defaults included,
written into the model's options when it is built (fairseq saves them in every checkpoint). An evaluation tool
then builds the model it was trained as even after a default changed in the code, and a run that would load it
into another model is refused (fairseq_fixes.same_attention)."""

from .roles import option_name

# how an EVA layer is computed, not what it computes: a trained model may run with another kernel or compile mode
NOT_RECORDED = ("eva_kernel", "eva_compile")


def plans_record(plans, roles):
    """{model attribute: value} of a model's plans; `roles` maps each role to its attention attribute."""
    record = {}
    for role, attention in roles.items():
        plan = plans[role]
        record[attention] = plan.kind
        values = dict(plan.options)
        for option, name in plan.attributes().items():
            if name not in NOT_RECORDED:
                record[name] = values[option]
    return record


def attention_record(args, roles, hydra=False):
    """The record of the model that `args` (the architecture's defaults filled in) describe."""
    from .plan import resolve_all

    return plans_record(resolve_all(args, roles, hydra), roles)


def show_record(record, attributes, hydra=False):
    """`--decoder-attention elu, --performer-num-features 256`: the record's values of `attributes` as options."""
    def value(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    between = "=" if hydra else " "
    return ", ".join(f"{option_name(a, hydra)}{between}{value(record[a])}" if a in record else
                     f"no {option_name(a, hydra)}" for a in attributes)
