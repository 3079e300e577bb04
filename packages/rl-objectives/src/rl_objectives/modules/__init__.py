"""rl_objectives.modules: networks, actors, critics, distributions and exploration (torchrl.modules names).

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from tdict.nn import TensorDictModule, NormalParamExtractor
    >>> from tdict.specs import Bounded
    >>> from rl_objectives.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    >>> net = TensorDictModule(torch.nn.Sequential(MLP(3, 4, num_cells=[16]), NormalParamExtractor()),
    ...                        in_keys=["observation"], out_keys=["loc", "scale"])
    >>> actor = ProbabilisticActor(net, in_keys=["loc", "scale"], distribution_class=TanhNormal,
    ...                            spec=Bounded(-1.0, 1.0, shape=(2,)))
    >>> critic = ValueOperator(MLP(3, 1, num_cells=[16]))
    >>> td = critic(actor(TensorDict(observation=torch.randn(8, 3), batch_size=[8])))
    >>> td["action"].shape, td["state_value"].shape
    (torch.Size([8, 2]), torch.Size([8]))
"""

from .safe_sequential import SafeSequential
from .actors import (
    Actor,
    ActorCriticWrapper,
    ActorValueOperator,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    SafeModule,
    SafeProbabilisticModule,
    ValueOperator,
)
from .decision_transformer import (
    DecisionTransformer,
    DecisionTransformerInferenceWrapper,
    DTActor,
    DTConfig,
    OnlineDTActor,
)
from .distributions import (
    Delta,
    IndependentNormal,
    MaskedCategorical,
    NormalParamExtractor,
    OneHotCategorical,
    ReparamGradientStrategy,
    TanhDelta,
    TanhNormal,
    TruncatedNormal,
)
from .exploration import (
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
)
from .models import MLP, ConvNet, SquashDims
from .batchrenorm import BatchRenorm1d
from .dueling import DuelingCnnDQNet, DuelingMlpDQNet
from .noisy import NoisyLazyLinear, NoisyLinear, reset_noise
from .distributional import DistributionalDQNnet, DistributionalQValueActor, DistributionalQValueModule
from .tanh import TanhModule
from .two_hot import SymExpTwoHot
from .dreamer_images import DreamerV3ImageDecoder, DreamerV3ImageEncoder
from .dreamer_layers import DreamerV3MLP
from .rssm_v3 import RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
from .rssm_state_estimator import RSSMStateEstimatorV3
from .dreamer_block_gru import DreamerV3BlockGRU, DreamerV3BlockGRUCell
from .dreamer_actor import DreamerV3DiscreteActor
from .distributional import DistributionalQValueHook
from .world_models import WorldModel, WorldModelWrapper
from ..functional.dreamer import symexp, symlog
from ..functional.signed_hyperbolic import signed_hyperbolic, signed_parabolic
from .value_norm import PercentileValueNorm, PopArtValueNorm, RunningValueNorm, ValueNorm
from .value_transforms import (
    ComposeValueTransform,
    IdentityValueTransform,
    SignedHyperbolicValueTransform,
    SymLogValueTransform,
    ValueTransform,
)
from .recurrent import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode
from .multiagent import Mixer, MultiAgentConvNet, MultiAgentMLP, MultiAgentNetBase, QMixer, VDNMixer

__all__ = [
    "MLP",
    "Actor",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "AdditiveGaussianModule",
    "BatchRenorm1d",
    "ComposeValueTransform",
    "ConvNet",
    "DTActor",
    "DTConfig",
    "DecisionTransformer",
    "DecisionTransformerInferenceWrapper",
    "DreamerV3ImageDecoder",
    "DreamerV3ImageEncoder",
    "DreamerV3MLP",
    "Delta",
    "DistributionalDQNnet",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "DuelingCnnDQNet",
    "DuelingMlpDQNet",
    "EGreedyModule",
    "GRUModule",
    "IdentityValueTransform",
    "IndependentNormal",
    "LSTMModule",
    "MaskedCategorical",
    "Mixer",
    "MultiAgentConvNet",
    "MultiAgentMLP",
    "MultiAgentNetBase",
    "NoisyLazyLinear",
    "NoisyLinear",
    "NormalParamExtractor",
    "OneHotCategorical",
    "OnlineDTActor",
    "OrnsteinUhlenbeckProcessModule",
    "PercentileValueNorm",
    "PopArtValueNorm",
    "ProbabilisticActor",
    "QMixer",
    "QValueActor",
    "QValueModule",
    "RSSMPosteriorV3",
    "RSSMPriorV3",
    "RSSMRolloutV3",
    "RSSMStateEstimatorV3",
    "DreamerV3BlockGRU",
    "DreamerV3BlockGRUCell",
    "DreamerV3DiscreteActor",
    "DistributionalQValueHook",
    "ReparamGradientStrategy",
    "RunningValueNorm",
    "SafeModule",
    "SafeProbabilisticModule",
    "SafeSequential",
    "SignedHyperbolicValueTransform",
    "SquashDims",
    "SymExpTwoHot",
    "SymLogValueTransform",
    "TanhDelta",
    "TanhModule",
    "TanhNormal",
    "TruncatedNormal",
    "VDNMixer",
    "ValueNorm",
    "ValueTransform",
    "WorldModel",
    "WorldModelWrapper",
    "recurrent_mode",
    "reset_noise",
    "set_recurrent_mode",
    "signed_hyperbolic",
    "signed_parabolic",
    "symexp",
    "symlog",
    "ValueOperator",
]
