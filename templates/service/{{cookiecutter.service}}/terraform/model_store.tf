# The bucket the model versions are served from (servinglib.yaml: repository: s3://BUCKET/
# {{ cookiecutter.service }}/<model>), written by CI's publish job (`servinglib publish`) and
# read by the serving pods. Created only when model_bucket is set.
#
# Serving reads, CI writes: the serving role gets s3:GetObject and s3:ListBucket on this bucket
# and nothing else; the CI role also puts and deletes objects (publish stages each version
# under a hidden prefix and removes it afterwards). Both roles exist already (IRSA or pod
# identity for the pods, GitHub OIDC for CI); only their policies are added here.

variable "model_bucket" {
  description = "S3 bucket of the published model versions; empty: no bucket"
  type        = string
  default     = ""
}

variable "model_serving_role" {
  description = "Name of the IAM role the serving pods assume (read-only on the model bucket)"
  type        = string
  default     = ""
}

variable "model_publisher_role" {
  description = "Name of the IAM role CI's publish job assumes (writes to the model bucket)"
  type        = string
  default     = ""
}

locals {
  model_store = var.model_bucket == "" ? 0 : 1
}

resource "aws_s3_bucket" "models" {
  count  = local.model_store
  bucket = var.model_bucket
  tags = {
    team    = "{{ cookiecutter.team }}"
    service = "{{ cookiecutter.service }}"
  }
}

# Every overwrite or delete keeps the object's previous version: a model can be restored.
resource "aws_s3_bucket_versioning" "models" {
  count  = local.model_store
  bucket = aws_s3_bucket.models[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_public_access_block" "models" {
  count                   = local.model_store
  bucket                  = aws_s3_bucket.models[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "models" {
  count  = local.model_store
  bucket = aws_s3_bucket.models[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "aws:kms"
    }
    bucket_key_enabled = true
  }
}

data "aws_iam_policy_document" "model_read" {
  count = local.model_store
  statement {
    sid       = "ListModelVersions"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.models[0].arn]
  }
  statement {
    sid       = "ReadModelFiles"
    actions   = ["s3:GetObject"]
    resources = ["${aws_s3_bucket.models[0].arn}/*"]
  }
}

data "aws_iam_policy_document" "model_publish" {
  count = local.model_store
  statement {
    sid       = "ListModelVersions"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.models[0].arn]
  }
  statement {
    sid       = "PublishModelVersions"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.models[0].arn}/*"]
  }
}

resource "aws_iam_role_policy" "model_read" {
  count  = var.model_bucket != "" && var.model_serving_role != "" ? 1 : 0
  name   = "${var.service}-model-read"
  role   = var.model_serving_role
  policy = data.aws_iam_policy_document.model_read[0].json
}

resource "aws_iam_role_policy" "model_publish" {
  count  = var.model_bucket != "" && var.model_publisher_role != "" ? 1 : 0
  name   = "${var.service}-model-publish"
  role   = var.model_publisher_role
  policy = data.aws_iam_policy_document.model_publish[0].json
}
