package request

// Code is an error code of docs/protocol.md, Outcomes: why a request was rejected.
type Code string

// The error codes of docs/protocol.md, Outcomes.
const (
	BadRequest             Code = "bad_request"
	NoEndpoints            Code = "no_endpoints"
	AllWorkersOverloaded   Code = "all_workers_overloaded"
	PinnedWorkerOverloaded Code = "pinned_worker_overloaded"
	PinnedWorkerNotAllowed Code = "pinned_worker_not_allowed"
	QueueFull              Code = "queue_full"
	Expired                Code = "expired"
	// BudgetExceeded: the key's token budget alone would keep the request
	// waiting past its deadline (docs/design.md, Token budgets).
	BudgetExceeded Code = "budget_exceeded"
	// DeadlineUnreachable: the work ahead of the request at its class's
	// measured drain rate would keep it waiting past its deadline
	// (docs/design.md, Shedding).
	DeadlineUnreachable Code = "deadline_unreachable"
)

// Codes lists every code, for metrics that are initialised up front.
var Codes = []Code{BadRequest, NoEndpoints, AllWorkersOverloaded, PinnedWorkerOverloaded,
	PinnedWorkerNotAllowed, QueueFull, Expired, BudgetExceeded, DeadlineUnreachable}
