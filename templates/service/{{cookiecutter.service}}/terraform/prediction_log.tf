# Where the prediction log streams (servinglib.yaml, monitoring.prediction_log.sinks): a Kafka
# topic and an S3 bucket for the Parquet lake. Each is created only when its variable is set.

variable "kafka_bootstrap_servers" {
  description = "host:port of the Kafka cluster for the prediction topic; empty: no topic"
  type        = string
  default     = "{{ cookiecutter.kafka_bootstrap_servers if "kafka" in cookiecutter.prediction_sinks else "" }}"
}

variable "prediction_topic" {
  description = "Kafka topic of the prediction events (one message per answer)"
  type        = string
  default     = "{{ cookiecutter.kafka_topic }}"
}

variable "prediction_topic_partitions" {
  description = "Partitions of the prediction topic (messages are keyed by request id)"
  type        = number
  default     = 12
}

variable "prediction_retention_ms" {
  description = "How long Kafka keeps prediction events"
  type        = number
  default     = 604800000
}

variable "prediction_bucket" {
  description = "S3 bucket of the Parquet prediction lake; empty: no bucket"
  type        = string
  default     = "{{ cookiecutter.lake_bucket }}"
}

resource "kafka_topic" "predictions" {
  count              = var.kafka_bootstrap_servers == "" ? 0 : 1
  name               = var.prediction_topic
  partitions         = var.prediction_topic_partitions
  replication_factor = 3
  config = {
    "retention.ms"        = tostring(var.prediction_retention_ms)
    "min.insync.replicas" = "2"
    "compression.type"    = "producer"
  }
}

resource "aws_s3_bucket" "predictions" {
  count  = var.prediction_bucket == "" ? 0 : 1
  bucket = var.prediction_bucket
  tags = {
    team    = "{{ cookiecutter.team }}"
    service = "{{ cookiecutter.service }}"
  }
}
