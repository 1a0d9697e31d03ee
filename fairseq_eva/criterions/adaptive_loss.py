"""`adaptive_loss_fp32_sum`: fairseq's adaptive_loss with the batch's sum kept in float32.

fairseq's adaptive_loss sums a batch's cross-entropy in the logits' dtype. Under --fp16 that sum overflows
float16 (65504) whenever tokens x loss per token does: the Wikitext-103 configs' 8192 tokens a GPU at more
than 8 nats a token, so the first thousands of updates log `loss: inf`. The gradients never see the sum
(each token's loss enters with weight 1), so training is right; only the logged value is lost. Here each
token's loss is computed as before, in the logits' dtype, and summed in float32: the same gradients, the same
speed and memory, and a finite log. The configs use it; it needs the plugin (`common.user_dir`).
"""

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.adaptive_loss import AdaptiveLoss, AdaptiveLossConfig

from ..errors import UserError


@register_criterion("adaptive_loss_fp32_sum", dataclass=AdaptiveLossConfig)
class AdaptiveLossFP32Sum(AdaptiveLoss):
    """fairseq's adaptive_loss (same options, same logged metrics) whose sum over the batch is float32."""

    def forward(self, model, sample, reduce=True):
        if not reduce:  # one loss per token: nothing is summed
            return super().forward(model, sample, reduce)
        adaptive_softmax = getattr(model.decoder, "adaptive_softmax", None)
        if adaptive_softmax is None:
            raise UserError("criterion adaptive_loss_fp32_sum needs a model with an adaptive softmax "
                             "(--adaptive-softmax-cutoff); use cross_entropy otherwise")
        net_output = model(**sample["net_input"])
        target = model.get_targets(sample, net_output)
        nsentences = target.size(0)
        target = target.view(-1)
        logits, targets = adaptive_softmax(net_output[0], target)  # the head and each tail cluster
        loss = torch.zeros((), dtype=torch.float32, device=target.device)
        for cluster_logits, cluster_target in zip(logits, targets):
            if cluster_target is not None:
                token_loss = F.cross_entropy(cluster_logits, cluster_target, ignore_index=self.padding_idx,
                                             reduction="none")
                loss = loss + token_loss.float().sum()
        ntokens = utils.strip_pad(target, self.padding_idx).numel()
        sample_size = nsentences if self.sentence_avg else ntokens
        logging_output = {"loss": loss.data, "ntokens": ntokens, "nsentences": nsentences, "sample_size": sample_size}
        return loss, sample_size, logging_output
