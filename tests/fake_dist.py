"""A fake process group for the preflight's payload exchange (dl_doctor.integrations.preflight._gather_json): the
little of torch and torch.distributed that the exchange uses, and honest payloads. Shared by
tests/integrations/test_preflight.py and tests/probes/test_fuzz.py."""


class FakeTensor:
    """The little of a torch tensor that the exchange uses, over a list of ints."""

    def __init__(self, values):
        self.v = list(values)

    def item(self):
        return self.v[0]

    def tolist(self):
        return list(self.v)

    def __getitem__(self, part):
        return FakeTensor(self.v[part])

    def __setitem__(self, part, other):
        self.v[part] = other.v if isinstance(other, FakeTensor) else other


class FakeTorch:
    int64, uint8 = "int64", "uint8"
    LARGEST = 64 << 20  # what a test machine may allocate for one tensor

    def __init__(self):
        self.allocated = []

    def tensor(self, values, dtype):
        return FakeTensor(values)

    def zeros(self, n, dtype):
        self.allocated.append(n)
        assert n <= self.LARGEST, f"allocated a tensor of {n} elements for a peer"
        return FakeTensor([0] * n)

    def frombuffer(self, data, dtype):
        return FakeTensor(data)


class FakeDist:
    """One rank of a job whose other ranks send ``peers`` (rank -> (announced size, payload bytes)); rank 0's
    broadcast verdict is ``verdict`` on the other ranks."""

    def __init__(self, rank, peers, verdict=None):
        self.rank, self.peers, self.verdict, self.calls = rank, peers, verdict, 0

    def get_rank(self):
        return self.rank

    def get_world_size(self):
        return len(self.peers) + 1

    def all_gather(self, out, mine):
        self.calls += 1
        for r in range(len(out)):
            if r == self.rank:
                out[r].v = list(mine.v)
            elif self.calls == 1:
                out[r].v = [self.peers[r][0]]
            else:
                data = self.peers[r][1]
                out[r].v = (list(data) + [0] * len(mine.v))[:len(mine.v)]

    def broadcast(self, tensor, src):
        if self.rank != src and self.verdict is not None:
            tensor.v[0] = self.verdict


def _payload(rank, section=None, **identity):
    import json

    ident = {"hostname": f"node-{rank}", "agent": 100 + rank, "rank": rank, **identity}
    return json.dumps({"identity": ident, "section": section if section is not None else
                       {"version": "1", "identity": {"hostname": f"node-{rank}"}, "compare": {"driver": "550"},
                        "failing": [], "warnings": 0}}).encode()


def _peers(payloads):
    return {r: (len(p), p) for r, p in payloads.items()}


def _mine(rank):
    import json

    return json.loads(_payload(rank))
