package harness

import "testing"

func TestMakeKeys(t *testing.T) {
	jobs := makeKeys(12)
	if len(jobs) != 3 || len(jobs[0]) != 5 || len(jobs[2]) != 2 {
		t.Fatalf("makeKeys(12) = %v", jobs)
	}
	for _, ks := range jobs {
		for i := 1; i < len(ks); i++ {
			if ks[i].Period <= ks[i-1].Period || ks[i].Job != ks[0].Job {
				t.Fatalf("periods not in string order: %v", ks)
			}
		}
	}
}
