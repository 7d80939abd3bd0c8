package naming_test

import (
	"fmt"

	"fairdispatch/naming"
)

func Example() {
	for _, prefix := range []string{"dispatch", "llama", "a.b-c"} {
		n, err := naming.New(prefix)
		if err != nil {
			panic(err)
		}
		fmt.Println(n.Req("premium"), n.ReqStream(), n.DLQStream(), n.LeaderBucket(), n.Durable())
	}
	_, err := naming.New("team/llama")
	fmt.Println(err)
	// Output:
	// dispatch.req.premium DISPATCH_REQ DISPATCH_DLQ fairdispatch_leader dispatcher
	// llama.req.premium LLAMA_REQ LLAMA_DLQ fairdispatch_llama_leader dispatcher
	// a.b-c.req.premium A_B_C_REQ A_B_C_DLQ fairdispatch_a_b_c_leader dispatcher
	// naming: invalid subject prefix "team/llama": stream name "TEAM/LLAMA_REQ" contains '/'
}
