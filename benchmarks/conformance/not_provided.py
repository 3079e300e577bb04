"""Why a public TorchRL 0.14 name has no counterpart under our imports.

``names.py`` lists, for each TorchRL module, the public names that the conformance aliases do not
resolve to one of our objects; each of them must be explained here. ``REASONS`` is an ordered list
of ``(reason, names)``; a name is explained by the first group that lists it. The README section
"TorchRL names not provided" is rendered from these groups (``names.py --readme``), and
``tests/integration/test_conformance_names.py`` checks that every missing name of the committed
``benchmarks/results/conformance_names.json`` has a reason and that README shows the current list.
"""

from __future__ import annotations

REASONS: list[tuple[str, frozenset[str]]] = [
    (
        "TorchRL's robot-arm and micro-duck task prototypes and its open-loop satellite preset (issue 16 asked "
        "for the satellite and humanoid macro actions: SatelliteMacroAction and HumanoidMacroAction run in closed "
        "loop inside MacroPrimitiveTransform)",
        frozenset(
            """
            CubeBowlEnv MicroDuckEnv MicroDuckTask MicroDuckTaskSampler SatelliteAttitudeTransform
            RobotMacroAction RobotMacroActionMode URScriptPrimitive URScriptPrimitiveTransform CartesianSolver
            """.split()
        ),
    ),
    (
        "Planned in issue 17 (DreamerV3 and world models, C51, noisy and dueling nets, TD3+BC, CrossQ, "
        "value normalisation, multi-agent PPO)",
        frozenset(
            """
            DreamerDecoder DreamerEnv ImaginedEnv ModelBasedEnvBase WorldModelEnv DreamerActor
            DreamerV3BlockGRU DreamerV3BlockGRUCell DreamerV3DiscreteActor DreamerV3ImageDecoder
            DreamerV3ImageEncoder DreamerV3MLP DreamerV3SeededPolicy ObsDecoder ObsEncoder RSSMPosterior
            RSSMPosteriorV3 RSSMPrior RSSMPriorV3 RSSMRollout RSSMRolloutV3 RSSMStateEstimatorV3 WorldModel
            WorldModelWrapper SymExpTwoHot symexp symlog two_hot_cross_entropy two_hot_decode two_hot_encode
            categorical_kl_balanced categorical_kl_terms DreamerActorLoss DreamerModelLoss DreamerValueLoss
            DreamerV3ActorLoss DreamerV3Loss DreamerV3ModelLoss DreamerV3ValueLoss WorldModelLoss
            DistributionalDQNLoss DistributionalDQNnet DistributionalQValueActor DistributionalQValueHook
            DistributionalQValueModule NoisyLinear NoisyLazyLinear reset_noise DuelingCnnDQNet TD3BCLoss
            CrossQLoss BatchRenorm1d ValueNorm PopArtValueNorm PercentileValueNorm RunningValueNorm
            ValueTransform IdentityValueTransform ComposeValueTransform SymLogValueTransform
            SignedHyperbolicValueTransform signed_hyperbolic signed_parabolic IPPOLoss MAPPOLoss
            CrossCriticGroupSpec CrossGroupCritic
            """.split()
        ),
    ),
    (
        "Simulators and libraries we do not wrap (not installable here, GPU- or licence-bound, or outside "
        "the project's scope); a wrapper is a self-contained addition on GymWrapper's pattern",
        frozenset(
            """
            CraftGroundEnv CraftGroundWrapper GenesisEnv GenesisWrapper HabitatEnv IsaacGymEnv IsaacGymWrapper
            IsaacLabWrapper JumanjiEnv JumanjiWrapper LBForagingEnv LBForagingWrapper LiberoEnv LiberoWrapper
            MJLabEnv MJLabWrapper MOGymEnv MOGymWrapper MeltingpotEnv MeltingpotWrapper
            MujocoPlaygroundAgentMapping MujocoPlaygroundAgentSpec MujocoPlaygroundEnv MujocoPlaygroundWrapper
            OpenMLEnv OpenSpielEnv OpenSpielWrapper ProcgenEnv ProcgenWrapper RoboHiveEnv SMACv2Env
            SMACv2Wrapper UnityMLAgentsEnv UnityMLAgentsWrapper MultiThreadedEnv MultiThreadedEnvWrapper
            ChessEnv FinancialRegimeEnv VecGymEnvTransform register_gym_spec_conversion get_available_libraries
            """.split()
        ),
    ),
    (
        "TorchRL's LLM stack: rl-llm covers post-training with its own trainers and names "
        "(GRPOTrainer, SFTTrainer, DPOTrainer, see rl_llm)",
        frozenset(
            """
            LLMHashingEnv Tokenizer AdaptiveKLController ConstantKLController History ContentBase PromptData
            PromptTensorDictTokenizer TensorDictTokenizer TokenizedDatasetLoader PairwiseDataset RewardData
            RolloutFromModel TopKRewardSelector create_infinite_iterator get_dataloader PromptGroupSampler
            LLMMaskedCategorical LMHeadActorValueOperator KLAdaptiveLR PolicyAgeFilter StalenessAwareSampler
            ConditionalUpdateResult
            """.split()
        ),
    ),
    (
        "TorchRL's vision-language-action and robot-learning prototypes (experimental there; no issue asks "
        "for them yet)",
        frozenset(
            """
            ActionChunkTransform ActionTokenizerTransform ToyVLAEnv TinyVLA VLAWrapperBase LeRobotPolicyWrapper
            ActionTokenizerBase UniformActionTokenizer VocabTailActionTokenizer RobotDatasetMetadata
            validate_vla_tensordict VideoClipRef clear_video_decoder_cache set_video_decoder_cache_size
            DecodeVideoTransform ACTLoss DiffusionBCLoss DiffusionActor
            """.split()
        ),
    ),
    (
        "Transforms that download pretrained vision models at run time (the tests here cannot fetch weights; "
        "a user can wrap any torchvision backbone with UnaryTransform)",
        frozenset("R3MTransform VIPTransform VIPRewardTransform VC1Transform".split()),
    ),
    (
        "Monte-Carlo tree search and tensor maps (MCTS forests, hashing modules): not built yet, no issue "
        "asks for them",
        frozenset(
            """
            MCTSForest Tree QueryModule TensorDictMap TensorMap HashToInt RandomProjectionHash SipHash
            BinaryToDecimal Hash MCTSScore MCTSScores PUCTScore UCBScore UCB1TunedScore EXP3Score TicTacToeEnv
            """.split()
        ),
    ),
    (
        "Model-based planners and PILCO's parts: not built yet, no issue asks for them",
        frozenset("CEMPlanner MPCPlannerBase MPPIPlanner GPWorldModel RBFController ExponentialQuadraticCost".split()),
    ),
    (
        "TorchRL's storage checkpointer classes: our buffers save and load in their own crash-safe format "
        "that never unpickles (ReplayBuffer.dumps/loads), so TorchRL's on-disk layouts are not reproduced",
        frozenset(
            """
            CompressedListStorageCheckpointer FlatStorageCheckpointer H5StorageCheckpointer
            ListStorageCheckpointer NestedStorageCheckpointer StorageCheckpointerBase
            StorageEnsembleCheckpointer TensorStorageCheckpointer Flat2TED Nested2TED TED2Flat TED2Nested
            H5Combine H5Split
            """.split()
        ),
    ),
    (
        "Process-global switches, not copied (DESIGN §2): our recurrent modules take the matmul precision "
        "as an argument, and the Gymnasium backend is fixed",
        frozenset(
            """
            set_gym_backend set_recurrent_matmul_precision get_recurrent_matmul_precision
            RecurrentMatmulPrecision RecurrentMatmulPrecisionUserMode
            """.split()
        ),
    ),
    (
        "Deprecated in TorchRL (its own docs point to the replacement, which we provide: the exploration "
        "modules AdditiveGaussianModule, EGreedyModule, OrnsteinUhlenbeckProcessModule; NormalParamExtractor)",
        frozenset("AdditiveGaussianWrapper EGreedyWrapper OrnsteinUhlenbeckProcessWrapper NormalParamWrapper".split()),
    ),
]

NOT_BUILT_YET = "Not built yet: no issue covers it so far"


def reason_for(name: str) -> str:
    """The reason a missing TorchRL name is not provided (``NOT_BUILT_YET`` when no group lists it)."""
    for reason, names in REASONS:
        if name in names:
            return reason
    return NOT_BUILT_YET
